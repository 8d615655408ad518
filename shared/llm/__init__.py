"""Language models behind one provider-neutral interface."""
