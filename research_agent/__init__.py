"""research_agent."""
