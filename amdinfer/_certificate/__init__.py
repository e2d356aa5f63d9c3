"""The precision certificate: what was judged, how, on which data, stored with the model (private)."""
