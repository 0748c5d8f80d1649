/*
 * sisci_error.h - SISCI error codes, as implemented by vsci.
 *
 * The numeric values are the ones Dolphin's SISCI uses, so programs that
 * print or compare raw codes see the same numbers.  Every error value has
 * bit 30 set (SCI_ERR_MASK); errors reported by a remote node also have
 * bit 0 set (SCI_ERR_REMOTE_MASK).
 */
#ifndef SISCI_ERROR_H
#define SISCI_ERROR_H

#define SCI_ERR_MASK        0x40000000
#define SCI_ERR_REMOTE_MASK 0x01
#define SCI_ERR(u)          ((u) & 0x7FFFFFFF)

typedef enum {
    SCI_ERR_OK                    = 0x000,

    SCI_ERR_BUSY                  = 0x40000900,
    SCI_ERR_FLAG_NOT_IMPLEMENTED  = 0x40000901,
    SCI_ERR_ILLEGAL_FLAG          = 0x40000902,
    SCI_ERR_NOSPC                 = 0x40000904,
    SCI_ERR_API_NOSPC             = 0x40000905,
    SCI_ERR_HW_NOSPC              = 0x40000906,
    SCI_ERR_NOT_IMPLEMENTED       = 0x40000907,
    SCI_ERR_ILLEGAL_ADAPTERNO     = 0x40000908,
    SCI_ERR_NO_SUCH_ADAPTERNO     = 0x40000909,
    SCI_ERR_TIMEOUT               = 0x4000090A,
    SCI_ERR_OUT_OF_RANGE          = 0x4000090B,
    SCI_ERR_NO_SUCH_SEGMENT       = 0x4000090C,
    SCI_ERR_ILLEGAL_NODEID        = 0x4000090D,
    SCI_ERR_CONNECTION_REFUSED    = 0x4000090E,
    SCI_ERR_SEGMENT_NOT_CONNECTED = 0x4000090F,
    SCI_ERR_SIZE_ALIGNMENT        = 0x40000910,
    SCI_ERR_OFFSET_ALIGNMENT      = 0x40000911,
    SCI_ERR_ILLEGAL_PARAMETER     = 0x40000912,
    SCI_ERR_MAX_ENTRIES           = 0x40000913,
    SCI_ERR_SEGMENT_NOT_PREPARED  = 0x40000914,
    SCI_ERR_ILLEGAL_ADDRESS       = 0x40000915,
    SCI_ERR_ILLEGAL_OPERATION     = 0x40000916,
    SCI_ERR_ILLEGAL_QUERY         = 0x40000917,
    SCI_ERR_SEGMENTID_USED        = 0x40000918,
    SCI_ERR_SYSTEM                = 0x40000919,
    SCI_ERR_CANCELLED             = 0x4000091A,
    SCI_ERR_NOT_CONNECTED         = 0x4000091B,
    SCI_ERR_NOT_AVAILABLE         = 0x4000091C,
    SCI_ERR_INCONSISTENT_VERSIONS = 0x4000091D,
    SCI_ERR_COND_INT_RACE_PROBLEM = 0x4000091E,
    SCI_ERR_OVERFLOW              = 0x4000091F,
    SCI_ERR_NOT_INITIALIZED       = 0x40000920,
    SCI_ERR_ACCESS                = 0x40000921,

    SCI_ERR_NO_SUCH_NODEID        = 0x40000A00,
    SCI_ERR_NODE_NOT_RESPONDING   = 0x40000A02,
    SCI_ERR_NO_REMOTE_LINK_ACCESS = 0x40000A04,
    SCI_ERR_NO_LINK_ACCESS        = 0x40000A05,
    SCI_ERR_TRANSFER_FAILED       = 0x40000A06
} sci_error_t;

#endif /* SISCI_ERROR_H */
