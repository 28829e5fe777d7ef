"""Local OCR of image attachments with Tesseract."""
