//! Every hostile agent (`fixtures/agents/`) is stopped with the right class, the host stays
//! bounded, and the same runtime goes on serving. One file per thing proven.

use ari_testkit::runtime as common;
mod support;

mod cpu_is_bounded;
mod escapes_are_contained;
mod memory_is_bounded;
mod output_is_bounded;
mod storage_is_isolated;
