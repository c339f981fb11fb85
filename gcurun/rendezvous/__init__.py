"""How the ranks of a ``tcp`` job find each other, shared by the launcher and the ranks.

Standard library only (and :mod:`gcurun.errors`), so the launcher imports it without the
runtime's numpy: :mod:`.wire` (the HMAC handshake and JSON framing every connection of a
job starts with), :mod:`.server` (the rendezvous the launcher serves) and :mod:`.client`
(a rank's connection to it).
"""
