"""The leaves: the vocabulary, errors, the clock, the console writer, env ids, and the
kept programs on disk. Nothing here imports another package of jaxspreeze."""
