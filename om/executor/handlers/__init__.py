"""One module per request type; each exports ``execute``."""
