"""The columnar path: reduce_table over Arrow, its values, Ray and Hugging Face datasets."""
