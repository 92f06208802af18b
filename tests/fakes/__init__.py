"""Fakes of the CANN toolkit for tests: an ``atc`` executable and an ``acl`` (pyACL) package.

They follow the documented interfaces exactly — flags, error codes and output lines of ATC;
call order, return conventions and return codes of pyACL — and produce real results: the fake
``.om`` holds the frozen graph ATC was given, and the fake pyACL runs it with TensorFlow. See
``fake_atc.py``, ``fake_om.py`` and ``acl/``.
"""
