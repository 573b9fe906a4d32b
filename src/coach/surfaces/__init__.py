"""How people reach coach: the LiveKit worker, the text chat REPL, the operator CLI."""
