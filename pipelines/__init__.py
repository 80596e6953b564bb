"""The staged pipeline from a task description to a trained, evaluated agent."""
