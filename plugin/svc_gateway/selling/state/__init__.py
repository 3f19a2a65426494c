"""What the paid flow remembers: protocols and their in-process, journal and Redis stores."""
