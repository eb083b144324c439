//! decide: the effective authority class of the tool, by the registry's word
//! (Cedar policy, guards and budgets join this stage in later issues).

use toolgate_core::Decision;

use crate::catalog::ExposedTool;

pub fn decide(tool: &ExposedTool) -> Decision {
    toolgate_core::decision::decide(&tool.view)
}
