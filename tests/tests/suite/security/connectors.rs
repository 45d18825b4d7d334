//! See `super`: attacks through installs, webhooks, bindings and connector endpoints.
