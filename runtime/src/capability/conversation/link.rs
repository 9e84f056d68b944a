//! `history` and `ask-for-input` of `interface conversation`: linkage and fuel.

use wasmtime::component::LinkerInstance;

use super::ConversationCapability;
use crate::bindings::conversation as wit;
use crate::fuel_costs::FuelCost;
use crate::host::{Cx, HostFunctions, charge, charge_bytes};
use crate::state::TaskState;

/// The fully qualified name of the interface.
pub const CONVERSATION_IMPORT: &str = "ainur:ari/conversation@2.0.0";

/// `history`: the bytes of the turns handed over.
pub const HISTORY: FuelCost = FuelCost::new(1_000, 1);
/// `ask-for-input`: a flag.
pub const ASK: FuelCost = FuelCost::new(200, 0);
/// This capability's entries of the fuel table.
pub const FUEL: &[(&str, FuelCost)] = &[("history", HISTORY), ("ask-for-input", ASK)];

/// This capability's host functions (its `Capability::HOST`).
pub(crate) const HOST: HostFunctions = HostFunctions {
    interface: CONVERSATION_IMPORT,
    link,
    fuel: FUEL,
};

fn link(conversation: &mut LinkerInstance<'_, TaskState>) -> wasmtime::Result<()> {
    conversation.func_wrap("history", |mut cx: Cx<'_>, (): ()| {
        charge(&mut cx, HISTORY, 0)?;
        let turns = cx
            .data()
            .caps()
            .with(|c: &mut ConversationCapability, rec| c.history(rec))?;
        let bytes = turns.iter().map(|t| t.input.len() + t.output.len()).sum();
        charge_bytes(&mut cx, HISTORY, bytes)?;
        let turns: Vec<wit::Turn> = turns
            .into_iter()
            .map(|t| wit::Turn {
                number: t.number,
                input: t.input,
                output: t.output,
            })
            .collect();
        Ok((turns,))
    })?;
    conversation.func_wrap("ask-for-input", |mut cx: Cx<'_>, (): ()| {
        charge(&mut cx, ASK, 0)?;
        cx.data().caps().get::<ConversationCapability>().ask();
        Ok(())
    })
}
