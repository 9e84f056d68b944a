//! Module validation and the artifact cache.
use ari_testkit::runtime as common;

use ari_runtime::{FailureKind, LoadSource, Runtime, RuntimeConfig, RuntimeError};
use common::*;

fn invalid(bytes: &[u8]) -> String {
    match runtime().load(bytes) {
        Err(e @ RuntimeError::InvalidModule(_)) => {
            assert_eq!(e.kind(), FailureKind::InvalidModule);
            e.to_string()
        }
        Err(e) => panic!("expected InvalidModule, got {e}"),
        Ok(_) => panic!("expected InvalidModule, the module loaded"),
    }
}

#[test]
fn a_core_module_is_invalid_with_a_readable_message() {
    let msg = invalid(&wat::parse_str("(module)").expect("wat"));
    assert!(msg.contains("core wasm module, not a component"), "{msg}");
    assert!(msg.contains("wasm32-wasip2"), "{msg}");
}

#[test]
fn a_component_without_the_agent_export_is_invalid() {
    let msg = invalid(&wat::parse_str("(component)").expect("wat"));
    assert!(
        msg.contains("does not export ainur:ari/agent@2.0.0"),
        "{msg}"
    );
}

#[test]
fn garbage_is_invalid() {
    let msg = invalid(b"definitely not wasm");
    assert!(msg.contains("not a WebAssembly binary"), "{msg}");
}

#[test]
fn a_second_load_comes_from_the_cache_without_compiling() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let bytes = agent_bytes("wordcount");

    let rt = Runtime::new(config.clone()).expect("runtime");
    let first = rt.load(&bytes).expect("load");
    assert_eq!(first.load_source(), LoadSource::Compiled);
    assert_eq!(rt.stats().compiles, 1);
    let entries = std::fs::read_dir(dir.path()).expect("cache dir").count();
    assert_eq!(entries, 1, "one artifact, no temp files left behind");

    // A new runtime (as after a restart) loads the artifact and does not compile.
    let rt2 = Runtime::new(config).expect("runtime");
    let second = rt2.load(&bytes).expect("load");
    assert_eq!(second.load_source(), LoadSource::Cache);
    assert_eq!(rt2.stats().compiles, 0);
    assert_eq!(rt2.stats().cache_hits, 1);
    let o = second.run(request("a b c", Default::default()));
    assert_eq!(o.failure, None);
    assert_eq!(output(&o), r#"{"lines":0,"words":3,"bytes":5}"#);
}

#[test]
fn a_corrupt_artifact_is_recompiled() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let bytes = agent_bytes("echo");
    Runtime::new(config.clone())
        .expect("rt")
        .load(&bytes)
        .expect("load");
    for entry in std::fs::read_dir(dir.path()).expect("dir") {
        std::fs::write(entry.expect("entry").path(), b"garbage").expect("corrupt");
    }
    let rt = Runtime::new(config).expect("rt");
    let agent = rt.load(&bytes).expect("load after corruption");
    assert_eq!(agent.load_source(), LoadSource::Compiled);
    assert_eq!(output(&agent.run(request("ok", Default::default()))), "ok");
}

/// A component whose core instances define `n` memories and `n` tables.
fn component_with(n: usize) -> Vec<u8> {
    let mut text = String::from("(component\n (core module $m (memory 1) (table 1 funcref))\n");
    for i in 0..n {
        text.push_str(&format!(" (core instance $i{i} (instantiate $m))\n"));
    }
    text.push(')');
    wat::parse_str(&text).expect("wat")
}

#[test]
fn a_component_over_the_per_component_memory_and_table_ceilings_is_refused_with_a_class() {
    use ari_runtime::{AllocatorChoice, EngineOptions};
    let pooled = Runtime::new(RuntimeConfig {
        cache_dir: None,
        engine: EngineOptions {
            allocator: AllocatorChoice::Pooling,
            pool: ari_runtime::PoolConfig::for_concurrency(2),
            ..EngineOptions::default()
        },
    })
    .expect("pooling runtime");
    let max = ari_runtime::engine::MAX_MEMORIES_PER_COMPONENT as usize;
    let within = pooled
        .load(&component_with(max))
        .err()
        .expect("no agent export");
    assert!(within.to_string().contains("does not export"), "{within}");
    let over = pooled
        .load(&component_with(max + 1))
        .err()
        .expect("over the ceiling");
    assert_eq!(over.kind(), FailureKind::InvalidModule, "{over}");
    assert!(over.to_string().contains("linear memories"), "{over}");
}
