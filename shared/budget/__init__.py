"""Each user's daily budget, kept in their ledger (DESIGN §13): tokens, reserved before
every provider call and settled after it, live-audio sessions, uploads and runs at once.
The rules are pure (``allowance``, ``voice_grants``); ``service.Budget`` applies them,
one ledger transaction each. It sits below the store, whose run slots use its rules.
"""
