//! Every SISCI value this library copies from the C headers (flags, query
//! commands, enumerations, error codes, the structures it reads from or
//! writes to programs), checked against `include/sisci_*.h` as the C
//! compiler sees them (issue 36: ~40 flag and query values were copied by
//! hand, unchecked).

use std::ffi::c_uint;

use vsci_client::{QueueState, SciError};
use vsci_proto::SegmentEvent;

use crate::dma::*;
use crate::tmem::TmemStats;
use crate::*;

const HEADERS: &[&str] = &["sisci_api.h", "vsci_tmem.h"];

fn check(pairs: &[(&str, u64)]) {
    let root = vsci_cprobe::workspace();
    vsci_cprobe::check(&[root.join("include")], HEADERS, pairs);
}

fn u(v: c_uint) -> u64 {
    u64::from(v)
}

#[test]
fn flags_and_queries_match_sisci_types_h() {
    check(&[
        ("SCI_FLAG_USE_CALLBACK", u(FLAG_USE_CALLBACK)),
        ("SCI_FLAG_EMPTY", u(FLAG_EMPTY)),
        ("SCI_FLAG_PRIVATE", u(FLAG_PRIVATE)),
        ("SCI_FLAG_DMA_SOURCE_ONLY", u(FLAG_DMA_SOURCE_ONLY)),
        ("SCI_FLAG_AUTO_ID", u(FLAG_AUTO_ID)),
        ("SCI_FLAG_ASYNCHRONOUS_CONNECT", u(FLAG_ASYNCHRONOUS_CONNECT)),
        ("SCI_FLAG_FORCE_DISCONNECT", u(FLAG_FORCE_DISCONNECT)),
        ("SCI_FLAG_NOTIFY", u(FLAG_NOTIFY)),
        ("SCI_FLAG_THREAD_SAFE", u(FLAG_THREAD_SAFE)),
        ("SCI_FLAG_FORCE_REMOVE", u(crate::FLAG_FORCE_REMOVE)),
        ("SCI_FLAG_FORCE_REMOVE", u(crate::dma::FLAG_FORCE_REMOVE)),
        ("SCI_FLAG_FIXED_MAP_ADDR", u(FLAG_FIXED_MAP_ADDR)),
        ("SCI_FLAG_READONLY_MAP", u(FLAG_READONLY_MAP)),
        ("SCI_FLAG_BROADCAST", u(FLAG_BROADCAST)),
        ("SCI_FLAG_CONDITIONAL_INTERRUPT_MAP", u(FLAG_CONDITIONAL_INTERRUPT_MAP)),
        ("SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP", u(FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP)),
        ("SCI_FLAG_LOCK_OPERATION", u(FLAG_LOCK_OPERATION)),
        ("SCI_FLAG_DMA_GLOBAL | SCI_FLAG_DMA_SYSDMA | SCI_FLAG_DMA_ADAPTER", u(SEG_DMA_ENGINE_HINTS)),
        ("SCI_FLAG_PHYSICAL | SCI_FLAG_CUDA_BUFFER | SCI_FLAG_SCIF_BUFFER", u(SEG_HARDWARE_MEMORY_FLAGS)),
        (
            "SCI_FLAG_IO_MAP_IOSPACE | SCI_FLAG_READ_PREFETCH_AGGR_HOLD_MAP | SCI_FLAG_READ_PREFETCH_NO_HOLD_MAP \
             | SCI_FLAG_DMOVE_MAP | SCI_FLAG_NO_MEMORY_LOOPBACK_MAP | SCI_FLAG_WRITES_DISABLE_GATHER_MAP \
             | SCI_FLAG_SHARED_MAP | SCI_FLAG_DISABLE_128_BYTES_PACKETS | SCI_FLAG_WRITE_BACK_CACHE_MAP",
            u(MAP_HINT_FLAGS),
        ),
        ("SCI_FLAG_NO_MEMORY_LOOPBACK_MAP", u(FLAG_NO_MEMORY_LOOPBACK_MAP)),
        ("SCI_FLAG_BLOCK_READ", u(FLAG_BLOCK_READ)),
        ("SCI_FLAG_ERROR_CHECK", u(FLAG_ERROR_CHECK)),
        ("SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY", u(FLAG_FLUSH_CPU_BUFFERS_ONLY)),
        ("SCI_FLAG_NO_FLUSH", u(FLAG_NO_FLUSH)),
        ("SCI_FLAG_NO_STORE_BARRIER", u(FLAG_NO_STORE_BARRIER)),
        ("SCI_FLAG_FAST_BARRIER", u(FLAG_FAST_BARRIER)),
        ("SCI_FLAG_CACHE_FLUSH", u(FLAG_CACHE_FLUSH)),
        ("SCI_FLAG_CACHE_INVALIDATE", u(FLAG_CACHE_INVALIDATE)),
        ("SCI_FLAG_FIXED_INTNO", u(FLAG_FIXED_INTNO)),
        ("SCI_FLAG_SHARED_INT", u(FLAG_SHARED_INT)),
        ("SCI_FLAG_COUNTING_INT", u(FLAG_COUNTING_INT)),
        ("SCI_FLAG_DMA_WAIT", u(FLAG_DMA_WAIT)),
        ("SCI_FLAG_DMA_POST", u(FLAG_DMA_POST)),
        ("SCI_FLAG_DMA_READ", u(FLAG_DMA_READ)),
        ("SCI_FLAG_DMA_PHDMA", u(FLAG_DMA_PHDMA)),
        ("SCI_FLAG_DMA_RESET", u(FLAG_DMA_RESET)),
        ("SCI_FLAG_DMA_CHANNEL_SHARED", u(FLAG_DMA_CHANNEL_SHARED)),
        ("SCI_FLAG_BROADCAST | SCI_FLAG_ALLOW_UNICAST", u(DMA_BROADCAST_FLAGS)),
        ("SCI_DMA_TYPE_DONTCARE", u(*DMA_TYPES.start())),
        ("SCI_DMA_TYPE_TRANSPARENT", u(*DMA_TYPES.end())),
        ("SCI_DMA_CHANNEL_ID_DONTCARE", u(DMA_CHANNEL_ID_DONTCARE)),
        ("SCI_FLAG_DMA_GLOBAL | SCI_FLAG_DMA_SYSDMA | SCI_FLAG_DMA_ADAPTER", u(DMA_ENGINE_HINTS)),
        ("SCI_FLAG_DMA_USER_MEM | SCI_FLAG_LOCK_USER_MEM", u(DMA_USER_MEM_HINTS)),
        ("SCI_Q_VENDORID", u(Q_VENDORID)),
        ("SCI_Q_API", u(Q_API)),
        ("SCI_Q_ADAPTER", u(Q_ADAPTER)),
        ("SCI_Q_SYSTEM", u(Q_SYSTEM)),
        ("SCI_Q_LOCAL_SEGMENT", u(Q_LOCAL_SEGMENT)),
        ("SCI_Q_REMOTE_SEGMENT", u(Q_REMOTE_SEGMENT)),
        ("SCI_Q_MAP", u(Q_MAP)),
        ("SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET", u(Q_MAP_MAPPED_TO_LOCAL_TARGET)),
        ("SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT", u(Q_ADAPTER_DMA_SIZE_ALIGNMENT)),
        ("SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT", u(Q_ADAPTER_DMA_OFFSET_ALIGNMENT)),
        ("SCI_Q_ADAPTER_DMA_MTU", u(Q_ADAPTER_DMA_MTU)),
        ("SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE", u(Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE)),
        ("SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE", u(Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE)),
        ("SCI_Q_ADAPTER_NODEID", u(Q_ADAPTER_NODEID)),
        ("SCI_Q_ADAPTER_SERIAL_NUMBER", u(Q_ADAPTER_SERIAL_NUMBER)),
        ("SCI_Q_ADAPTER_CARD_TYPE", u(Q_ADAPTER_CARD_TYPE)),
        ("SCI_Q_ADAPTER_NUMBER_OF_STREAMS", u(Q_ADAPTER_NUMBER_OF_STREAMS)),
        ("SCI_Q_ADAPTER_STREAM_BUFFER_SIZE", u(Q_ADAPTER_STREAM_BUFFER_SIZE)),
        ("SCI_Q_ADAPTER_CONFIGURED", u(Q_ADAPTER_CONFIGURED)),
        ("SCI_Q_ADAPTER_LINK_OPERATIONAL", u(Q_ADAPTER_LINK_OPERATIONAL)),
        ("SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK", u(Q_ADAPTER_HW_LINK_STATUS_IS_OK)),
        ("SCI_Q_ADAPTER_NUMBER", u(Q_ADAPTER_NUMBER)),
        ("SCI_Q_ADAPTER_INSTANCE_NUMBER", u(Q_ADAPTER_INSTANCE_NUMBER)),
        ("SCI_Q_ADAPTER_FIRMWARE_OK", u(Q_ADAPTER_FIRMWARE_OK)),
        ("SCI_Q_ADAPTER_CONNECTED_TO_SWITCH", u(Q_ADAPTER_CONNECTED_TO_SWITCH)),
        ("SCI_Q_ADAPTER_ATT_PAGE_SIZE", u(Q_ADAPTER_ATT_PAGE_SIZE)),
        ("SCI_Q_ADAPTER_DMA_AVAILABLE", u(Q_ADAPTER_DMA_AVAILABLE)),
        ("SCI_Q_SYSTEM_HOSTBRIDGE", u(Q_SYSTEM_HOSTBRIDGE)),
        ("SCI_Q_SYSTEM_WRITE_POSTING_ENABLED", u(Q_SYSTEM_WRITE_POSTING_ENABLED)),
        ("SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED", u(Q_SYSTEM_WRITE_COMBINING_ENABLED)),
        ("SCI_ADAPTER_CARD_TYPE_VSCI", u(ADAPTER_CARD_TYPE_VSCI)),
        ("SCI_SEQ_OK", u(SEQ_OK)),
        ("SCI_SEQ_NOT_RETRIABLE", u(SEQ_NOT_RETRIABLE)),
        ("SCI_CALLBACK_CANCEL", u(CALLBACK_CANCEL)),
        ("SCI_MAX_DATA_INTERRUPT_SIZE", vsci_proto::intr::DATA_MAX as u64),
        ("DIS_DMA_MAX_VECLEN", vsci_client::MAX_VECLEN as u64),
        ("DIS_BROADCAST_NODEID_GROUP_ALL", u64::from(vsci_client::GROUP_ALL)),
        ("SCI_INFINITE_TIMEOUT", u64::from(vsci_client::INFINITE)),
    ]);
}

/// Dolphin's `_SISCI_PUBLIC_CONST_<name>` symbols carry `<name>`'s value.
#[test]
fn exported_constants_match_sisci_types_h() {
    let pairs: Vec<(&str, u64)> = dolphin_abi::EXPORTED.iter().map(|&(name, v)| (name, u(v))).collect();
    assert!(pairs.len() > 60);
    check(&pairs);
}

#[test]
fn enumerations_and_error_codes_match() {
    let names: Vec<String> = SciError::ALL.iter().map(|e| e.c_name().to_string()).collect();
    let mut pairs: Vec<(&str, u64)> = SciError::ALL.iter().zip(&names).map(|(e, n)| (n.as_str(), *e as u64)).collect();
    pairs.extend([
        ("SCI_CB_CONNECT", SegmentEvent::Connect as u64),
        ("SCI_CB_DISCONNECT", SegmentEvent::Disconnect as u64),
        ("SCI_CB_NOT_OPERATIONAL", SegmentEvent::NotOperational as u64),
        ("SCI_CB_OPERATIONAL", SegmentEvent::Operational as u64),
        ("SCI_CB_LOST", SegmentEvent::Lost as u64),
        ("SCI_DMAQUEUE_IDLE", QueueState::Idle as u64),
        ("SCI_DMAQUEUE_GATHER", QueueState::Gather as u64),
        ("SCI_DMAQUEUE_POSTED", QueueState::Posted as u64),
        ("SCI_DMAQUEUE_DONE", QueueState::Done as u64),
        ("SCI_DMAQUEUE_ABORTED", QueueState::Aborted as u64),
        ("SCI_DMAQUEUE_ERROR", QueueState::Error as u64),
    ]);
    check(&pairs);
}

/// The structures programs hand the library (or it fills for them).
#[test]
fn structure_layouts_match() {
    use vsci_cprobe::layout;
    let pairs: Vec<(&str, u64)> = layout!("sci_query_string_t": QueryString { "str" => s, "length" => length })
        .chain(layout!("sci_query_adapter_t": QueryAdapter { "localAdapterNo" => local_adapter_no, "portNo" => port_no, "subcommand" => subcommand, "data" => data }))
        .chain(layout!("sci_query_system_t": QuerySystem { "subcommand" => subcommand, "data" => data }))
        .chain(layout!("sci_query_map_t": QueryMap { "map" => map, "subcommand" => subcommand, "data" => data }))
        .chain(layout!("sci_address_t": SciAddress { "nodeId" => node_id, "offsHi" => offs_hi, "offsLo" => offs_lo }))
        .chain(layout!("dis_dma_vec_t": DisDmaVec { "size" => size, "local_offset" => local_offset, "remote_offset" => remote_offset, "flags" => flags }))
        .chain(layout!("vsci_tmem_stats_t": TmemStats {
            "puts" => puts, "puts_refused" => puts_refused, "gets" => gets, "hits" => hits, "misses" => misses,
            "evictions" => evictions, "transfer_errors" => transfer_errors, "pages_used" => pages_used,
            "pages_lost" => pages_lost, "capacity_pages" => capacity_pages
        }))
        .collect();
    check(&pairs);
}
