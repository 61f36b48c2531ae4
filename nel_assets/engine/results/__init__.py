"""What a run leaves behind: the bundle, merged shard outputs, loaded runs and checks of the files."""
