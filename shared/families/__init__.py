"""Families (DESIGN §8): who belongs to which family, invites, roles."""
