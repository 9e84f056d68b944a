//! Raw bindings generated from `wit/ari.wit`. Agents use the safe API instead; this module is
//! public only because the [`crate::export_agent!`] macro expands to paths inside it.

wit_bindgen::generate!({
    path: "../../wit",
    world: "ari-agent",
    pub_export_macro: true,
    export_macro_name: "__export_ari_agent",
    default_bindings_module: "ari_sdk::bindings",
    // Lets agents and tests compare the contract's values (error cases above all).
    additional_derives: [PartialEq, Eq],
    // Floats (a temperature, an embedding's vectors) have no `Eq`.
    additional_derives_ignore: ["chat-request", "embedding-response"],
});
