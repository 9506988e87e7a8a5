"""One function per measured component; they put config, model, data and instruments together."""
