"""Building candidates: kcoder's load_inline wrapper and its faster build forms."""
