"""``msgx compare``: this installation's flight state against a reference, field by field per FLID.

``sources`` reads each side (read only), ``rules`` loads the known-differences file, ``diff`` is the
pure comparison and classification, ``report`` renders markdown and JSON.
"""
