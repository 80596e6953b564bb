"""What several test files share: tiny models, fake servers, W&B records, the docs' tested code blocks."""
