"""llama.cpp as an engine: placement, memory, step costs, bench, advice."""
