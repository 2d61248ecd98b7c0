from services.processor_worker.service import ProcessorWorker
from threadline.service import run

run(ProcessorWorker)
