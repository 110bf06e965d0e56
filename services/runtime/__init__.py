"""What the consumer services share: records, the retry/dead-letter policy, and faust wiring.

Not a service: services import it, it imports no service.
"""
