"""cachectl"""
