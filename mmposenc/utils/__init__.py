from .config_package import PACKAGE_DIR, register_config_package

__all__ = ['PACKAGE_DIR', 'register_config_package']
