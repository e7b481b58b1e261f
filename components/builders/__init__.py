"""Gatehouse builders."""
