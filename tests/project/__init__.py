"""The project itself: its documentation (every example run), its layout and imports, its packaging."""
