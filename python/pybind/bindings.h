// Each part of the core binds itself in its own file; module.cc only composes them.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace xdl_ec::python {

void BindShard(pybind11::module_& m);            // bind_shard.cc: EmbeddingShard, optimizer/initializer configs
void BindCodec(pybind11::module_& m);            // bind_codec.cc: ErasureCode
void BindLayout(pybind11::module_& m);           // bind_layout.cc: StripeLayout, server_of
void BindFt(pybind11::module_& m);               // bind_ft.cc: AccessCounter (checkpoint / CPR bookkeeping)
void BindRecovery(pybind11::module_& m);         // bind_recovery.cc: Recovery and Scrubber over fragment readers
void BindParityHolder(pybind11::module_& m);     // bind_parity_holder.cc: ParityHolder, forwarded-batch wire form
void BindDeltaForwarder(pybind11::module_& m);   // bind_delta_forwarder.cc: a data server's parity forwarding
void BindRowCache(pybind11::module_& m);         // bind_row_cache.cc: RowCache, a worker's cache of hot rows
void BindLinkSession(pybind11::module_& m);      // bind_link_session.cc: LinkSession, a direct link's messages
void BindShardServer(pybind11::module_& m);      // bind_shard_server.cc: ShardServer, push_pull's wire form
void BindParityLink(pybind11::module_& m);       // bind_parity_link.cc: the parity links' send and receive loops
void BindSortedUnique(pybind11::module_& m);     // bind_sorted_unique.cc: sorted_unique, a batch's unique keys
void BindDelimitedFields(pybind11::module_& m);  // bind_delimited_fields.cc: a TSV chunk's integer fields
void BindShardGroup(pybind11::module_& m);       // bind_shard_group.cc: ShardGroup, a table group's keys

// float32[n, dim] rows aligned at 64 bytes, so that TensorFlow wraps them without a copy (bind_shard.cc).
pybind11::array_t<float, pybind11::array::c_style> AlignedRows(size_t n, size_t dim);

}  // namespace xdl_ec::python
