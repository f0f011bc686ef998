"""Request tracking to the AODB (D16, US-08): register, send to COUTMSGS, time out."""
