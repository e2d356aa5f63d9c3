"""Small private helpers shared by the packages: files, validation, progress, memory, hardware facts."""
