//! Pure policy: which pods a drain acts on and how (filters) and in what order (plan), from the
//! settings (`config`, whose label selectors the rules use). No API call anywhere below this
//! module.

pub mod budgets;
pub mod filters;
pub mod plan;
