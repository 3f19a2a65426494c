"""The chat plugin: its state, slash commands, login, balance context, accounts, receipts."""
