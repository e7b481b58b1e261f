"""The answerability gate and what it weighs: the evidence each passage holds for a question, and its word lists."""
