"""The HTTP pull API for self-hosted workers (the wire), compatible with the Anthropic SDK."""
