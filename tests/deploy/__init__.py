"""Tests of what is shipped to run the proxy: the image, the cluster manifests, compose."""
