//! Docker's semantics over Wharf's engine, shared by `wharf run` and the Docker Engine API
//! so that the two cannot drift apart: the container create request and its conversion
//! into the engine's specs ([`create`]), docker's string syntaxes ([`syntax`]), and
//! docker's JSON views of containers, `ps` rows and events ([`views`]).

#![deny(unsafe_code)]

pub mod create;
pub mod listing;
pub mod syntax;
pub mod views;

pub use create::{CreateRequest, ImageFacts, Placement, Specs};
