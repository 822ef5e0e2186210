"""What every layer uses: units and the PCIe generation table, the one-line error types, atomic files and JSON,
measured tables with their provenance lines."""
