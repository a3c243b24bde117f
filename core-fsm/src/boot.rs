//! Node-side boot readiness (seed 003): NodeAvailable only after every
//! readiness fact; one typed boot fault otherwise.
