"""Request tracking to the AODB (D16, request lifecycle, US-08): register, send to COUTMSGS, time out."""
