"""sim: a discrete-event simulator of loading and serving LLMs on real, imperfect hardware."""

__version__ = "0.1.0"
