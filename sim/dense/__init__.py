"""dense"""
