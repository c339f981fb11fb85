"""The documentation site's own code: the MkDocs hook that writes the CLI reference from
gcurun's click commands, and the helpers its tests share (pages, code blocks)."""
