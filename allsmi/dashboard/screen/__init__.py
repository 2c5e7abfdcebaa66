"""The Textual app and what drives it: the app, its key actions, drawing the views, the feed of snapshots, options, footer, help, key names, the filter box, the terminal guard."""
