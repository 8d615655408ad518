"""Attachments: images and PDFs a user uploaded, checked and made ready for the model."""
