"""Container images: a BYOB benchmark's image (`nel package`) and `container://` harness images."""
