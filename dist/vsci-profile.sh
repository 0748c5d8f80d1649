# /etc/profile.d/vsci.sh: where SISCI programs find the node run by the
# vscid service (the library's default without it is /tmp/vscid.sock).
export VSCI_SOCKET=/run/vsci/vscid.sock
