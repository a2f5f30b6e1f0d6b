"""The models stage: records (``registry``), weight identity (``identity``), the hub (``hub``), resolution (``resolve``)."""
