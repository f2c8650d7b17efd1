"""A stand-in for rknn-toolkit-lite2 (`rknnlite`), for the tests only; see rknnlite/api."""
