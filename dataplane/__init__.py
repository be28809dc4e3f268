"""dataplane"""
