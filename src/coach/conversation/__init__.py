"""The live conversation: one person's session while it is open.

* :mod:`.userdata` — :class:`UserData`, what the three agents share: the open session,
  its phase lifecycle and the person's record;
* :mod:`.live_state` — the zones as the agents change them, pushed to the room at once
  and recorded behind the voice turn, and the renderer's runs;
* :mod:`.recorder` — one queue and one group-committing writer task per process
  (:class:`Recorder`) that stores the session without slowing the voice turn;
* :mod:`.attach` — what a LiveKit ``AgentSession`` says, recorded as it happens;
* :mod:`.runtime` — the wiring of all of it to a store, the prompts and a model.

The agents work on the live session (``UserData``, the live state, the recorder); only
the runtime and the attachment, which build agents and sessions, import the agents.
"""
