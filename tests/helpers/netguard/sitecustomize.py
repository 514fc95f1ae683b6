"""Loaded by every Python process that has this folder on PYTHONPATH (the training
child and its dataloader workers). Any attempt to reach a non-loopback address, or
to resolve a host name other than localhost, is recorded and refused."""

import ipaddress
import os
import socket

_LOG = os.environ.get("NETGUARD_LOG")
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def _record(what):
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(f"{os.getpid()} {what}\n")


def _is_loopback(host):
    if host is None:
        return True
    host = str(host)
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


def _guard(address):
    if isinstance(address, tuple) and not _is_loopback(address[0]):
        _record(f"connect {address[0]}:{address[1]}")
        raise OSError(101, f"netguard: network access to {address[0]} refused in tests")


def connect(self, address):
    _guard(address)
    return _connect(self, address)


def connect_ex(self, address):
    _guard(address)
    return _connect_ex(self, address)


def _is_ip_literal(host):
    try:
        ipaddress.ip_address(str(host).split("%")[0])
        return True
    except ValueError:
        return False


def getaddrinfo(host, *args, **kwargs):
    if not _is_loopback(host) and not _is_ip_literal(host):  # a literal needs no DNS; connect() is guarded
        _record(f"resolve {host}")
        raise socket.gaierror(socket.EAI_NONAME, f"netguard: name resolution of {host} refused in tests")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = connect
socket.socket.connect_ex = connect_ex
socket.getaddrinfo = getaddrinfo
