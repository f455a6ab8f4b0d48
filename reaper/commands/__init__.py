"""What the CLI commands other than run do: check, status, indexes, output."""
