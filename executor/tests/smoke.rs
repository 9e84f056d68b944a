mod common;
use common::*;

#[test]
fn echo_returns_its_input_and_is_metered() {
    let o = run("echo", "hello", ari_executor::Grants::default());
    assert_eq!(o.failure, None);
    assert_eq!(output(&o), "hello");
    assert!(o.resources_used.fuel > 0);
    assert!(o.resources_used.memory_bytes > 0);
    println!("{}", serde_json::to_string_pretty(&o).unwrap());
}
