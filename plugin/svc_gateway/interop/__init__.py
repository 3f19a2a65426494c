"""What buyers and sellers both speak to other agents: the agent card and the official MCP SDK."""
