//! Notifications: investigation reports and failure messages through the GitHub CLI, an HTTP
//! webhook or any command, with de-duplication and a cooldown.
